// The page's only script: submit on a question change, leave empty fields out of the URL
// (the permalink), read an uploaded config.json into the textarea, copy the command.
(function () {
  var form = document.getElementById("form");
  form.addEventListener("submit", function () {
    // a long config.json goes in the body: http.server refuses a request line over 64 KiB
    form.method = document.getElementById("f-config").value.length > 16000 ? "post" : "get";
    form.querySelectorAll("input, select, textarea").forEach(function (el) {
      if ((el.name && el.value === "" && el.type !== "radio") || !el.name) el.disabled = true;
    });
  });
  form.querySelectorAll("input[name=question]").forEach(function (r) {
    r.addEventListener("change", function () {
      // the server fills in the new question's starting values, then redirects (form.py)
      var mark = document.createElement("input");
      mark.type = "hidden"; mark.name = "switch"; mark.value = "1";
      form.appendChild(mark);
      form.requestSubmit();
    });
  });
  var file = document.getElementById("config-file");
  file.addEventListener("change", function () {
    var f = file.files[0];
    if (!f) return;
    var limit = +file.dataset.limit, note = document.getElementById("error-config-file");
    note.textContent = "";
    if (f.size > limit) {  // the CLI's bound on a config file, said before reading it
      note.textContent = f.name + " has " + f.size.toLocaleString("en-US") +
        " bytes; a config file has at most " + limit.toLocaleString("en-US");
      file.value = "";
      return;
    }
    f.text().then(function (text) {
      document.getElementById("f-config").value = text;
      document.getElementById("f-model").value = "";
    });
  });
  document.getElementById("f-config").addEventListener("input", function (e) {
    if (e.target.value.trim()) document.getElementById("f-model").value = "";
  });
  var copy = document.getElementById("copy");
  if (copy) copy.addEventListener("click", function () {
    var cmd = document.getElementById("cli-command");
    cmd.select();
    if (navigator.clipboard) navigator.clipboard.writeText(cmd.value).catch(function () {});
    else document.execCommand("copy");
    copy.textContent = "Copied";
  });
})();
