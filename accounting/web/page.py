"""The page's HTML: the form (from form.fields), then the answer (the CLI's answer block),
the downloads and the command, the plots, the CLI's other tables. Escaped everywhere."""
from __future__ import annotations

import json
from html import escape
from urllib.parse import urlencode

from accounting.architecture.fields import GROUPS as SPEC_GROUPS
from accounting.web import form, plots
from accounting.web.answer import MAX_CONFIG_CHARS, split_tables

_STATIC = __file__.rsplit("/", 1)[0]


def script_json(value) -> str:
    """JSON to sit inside <script type="application/json">: '<', '>' and '&' written as
    \\u003c, \\u003e, \\u0026 (the same string to JSON.parse), so no text in the data (a
    config's name) can close the element ('</script') or open an HTML comment ('<!--', which
    the HTML parser's script-data states track: it can swallow the closing tag)."""
    return (json.dumps(value, ensure_ascii=True).replace("<", "\\u003c")
            .replace(">", "\\u003e").replace("&", "\\u0026"))


def _static(name: str) -> str:
    with open(f"{_STATIC}/{name}", encoding="utf-8") as f:
        return f.read()


def _short(help_text: str, n: int = 90) -> str:
    text = help_text.split("; ")[0]
    text = text if len(text) <= n else text[:n - 1] + "…"
    return text + ")" * max(0, text.count("(") - text.count(")"))


def _error(name: str, a) -> str:
    if a is None or a.error_field != name:
        return ""
    return f'<span class="error" id="error-{name}" role="alert">{escape(a.error)}</span>'


def _input(f: form.Field, value: str, a) -> str:
    name, label = escape(f.name), escape(f.flag)
    bad = ' aria-invalid="true"' if a is not None and a.error_field == f.name else ""
    if f.kind == form.CHECK:
        on = " checked" if value.lower() in form.TRUE_WORDS else ""
        ctl = f'<input type="checkbox" name="{name}" id="f-{name}" value="1"{on}{bad}>'
    elif f.kind in (form.CHOICE, form.TRI):
        opts = f.choices if f.kind == form.CHOICE else (form.YES, form.NO)
        default = f"default ({f.default})" if f.default else "default"
        items = [f'<option value="">{escape(default)}</option>'] + [
            f'<option{" selected" if value == c else ""}>{escape(c)}</option>' for c in opts]
        ctl = f'<select name="{name}" id="f-{name}"{bad}>{"".join(items)}</select>'
    else:
        lst = f' list="l-{name}"' if f.choices else ""
        ctl = (f'<input type="text" name="{name}" id="f-{name}" value="{escape(value)}" '
               f'placeholder="{escape(f.default)}"{lst}{bad}>')
        if f.choices:
            ctl += f'<datalist id="l-{name}">' + "".join(
                f'<option value="{escape(c)}">' for c in f.choices) + "</datalist>"
    return (f'<div class="field" title="{escape(f.help)}"><label for="f-{name}">{label}</label>'
            f'{ctl}{_error(f.name, a)}<small>{escape(_short(f.help))}</small></div>')


def _groups(q: form.Question, query: dict, a) -> str:
    groups: dict[str, list[form.Field]] = {}
    for f in form.fields(q):
        groups.setdefault(f.group, []).append(f)
    out = []
    for title, fs in groups.items():
        has_value = any(query.get(f.name) for f in fs) or (a is not None and a.error_field
                                                            in {f.name for f in fs})
        asked = next((i for i, o in enumerate(q.open_groups) if title.startswith(o)), None) \
            if title not in SPEC_GROUPS else None
        is_open = has_value or asked is not None
        body = "".join(_input(f, query.get(f.name, ""), a) for f in fs)
        out.append(((0, asked) if asked is not None else (1, len(out)),
                    f'<details class="group"{" open" if is_open else ""}><summary>'
                    f'{escape(title)}</summary><div class="fields">{body}</div></details>'))
    # the question's own groups first, open, in its order (the GPU, the context, ...); the
    # architecture's fields, which override a preset, after them (was: about 40 of them
    # above the GPU)
    return "".join(html for _, html in sorted(out, key=lambda g: g[0]))


def _form(query: dict, a) -> str:
    q = form.question_of(query)
    tabs = "".join(
        f'<label class="tab{" on" if k == q.key else ""}"><input type="radio" name="question" '
        f'value="{k}"{" checked" if k == q.key else ""}>{escape(v.title)}</label>'
        for k, v in form.QUESTIONS.items())
    model = query.get("model", "")
    names = form.presets()
    opts = ['<option value="">(none: the config.json below)</option>'] + [
        f'<option{" selected" if model == n else ""}>{escape(n)}</option>' for n in names]
    if model and model not in names:  # keep what was typed, so its message makes sense
        opts.append(f'<option selected>{escape(model)}</option>')
    bad = ' aria-invalid="true"' if a is not None and a.error_field == "model" else ""
    config = query.get("config", "")
    return f"""<form id="form" method="get" action="/">
<div class="tabs">{tabs}</div>
<div class="source">
 <div class="field"><label for="f-model">model (a preset)</label>
  <select name="model" id="f-model"{bad}>{"".join(opts)}</select>{_error("model", a)}</div>
 <details class="group"{" open" if config.strip() else ""}><summary>or a config.json (paste or upload)</summary>
  <p class="muted">A Hugging Face config.json or the tool's own format, at most
  {MAX_CONFIG_CHARS - 1:,} bytes (the CLI's --config bound); choose "(none)" as the model.</p>
  <div class="field wide"><input type="file" id="config-file" accept=".json,application/json"
   data-limit="{MAX_CONFIG_CHARS - 1}"><span class="error" id="error-config-file"></span>
  <textarea name="config" id="f-config" rows="8" spellcheck="false"
   placeholder='{{"model_type": "llama", ...}}'>{escape(config)}</textarea>{_error("config", a)}</div>
 </details>
</div>
{_groups(q, query, a)}
<div class="actions"><button type="submit" id="submit">Answer</button></div>
</form>"""


def _toolbar(query: dict, a) -> str:
    link = "/?" + urlencode({k: v for k, v in query.items() if v})
    json_link = "/download.json?" + urlencode({k: v for k, v in query.items() if v})
    csv_link = "/download.csv?" + urlencode({k: v for k, v in query.items() if v})
    return f"""<div class="toolbar">
<a id="download-json" href="{escape(json_link)}" download="answer.json">Download JSON</a>
<a id="download-csv" href="{escape(csv_link)}" download="answer.csv">Download CSV</a>
<a id="permalink" href="{escape(link)}">Permalink</a>
<span class="cmd"><textarea id="cli-command" readonly rows="{1 + len(a.command) // 90}"
 spellcheck="false">{escape(a.command)}</textarea>
<button type="button" id="copy">Copy command</button></span></div>"""


def _result(query: dict, a) -> str:
    if a is None:
        return ""
    if not a.ok:
        where = "the model" if a.error_field in ("model", "config") else next(
            (f.flag for f in form.fields(form.question_of(query)) if f.name == a.error_field), "")
        general = (f'<p class="error" id="error-summary">No answer: see the message beside '
                   f'<a href="#f-{escape(a.error_field)}">{escape(where)}</a>.</p>'
                   if a.error_field else
                   f'<p class="error" id="error" role="alert">{escape(a.error)}</p>')
        return (f'<section id="result" class="failed">{general}<p class="muted">The command: '
                f'<code id="cli-command-failed">{escape(a.command)}</code></p></section>')
    blocks = split_tables(a.text)
    first = blocks[0][1] if blocks else ""
    rest = "".join(f'<details class="table" open><summary>{escape(t or "details")}</summary>'
                   f'<pre>{escape(b)}</pre></details>' for t, b in blocks[1:])
    notes = "".join(f"<li>{escape(n)}</li>" for n in a.notes)
    data = script_json(a.data) if a.data else "null"
    return f"""<section id="result">
<pre id="answer">{escape(first)}</pre>
{f'<ul id="notes">{notes}</ul>' if notes else ''}
{_toolbar(query, a)}
<section id="plots">{"".join(plots.plots(a))}</section>
<section id="tables">{rest}</section>
<script type="application/json" id="data">{data}</script>
</section>"""


def render(query: dict, a) -> str:
    """The whole page for a query and its answer (None: the form only)."""
    q = form.question_of(query)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(q.title)} · Transformer LM resource accounting</title>
<style>{_static("page.css")}</style></head>
<body><header><h1>Transformer LM resource accounting</h1>
<p class="muted">Exact parameters, memory and FLOPs of decoder-only Transformers. Every
answer below is the output of <code>python -m accounting</code> on this machine, run on
the command shown; the page computes nothing itself.</p></header>
<main>{_form(query, a)}{_result(query, a)}</main>
<script>{_static("page.js")}</script></body></html>"""
