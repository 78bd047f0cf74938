"""The ground floor of presentation: plain tables (Table), the renderer (text, Markdown,
CSV, JSON) and the output writer, which every stage imports and which import no stage."""
