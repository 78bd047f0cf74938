"""A checkpoint as a counter (issue 42): its safetensors headers read (headers.py; a GGUF
file by gguf_file.py; both return records.py's Tensor and Checkpoint), matched
to the ledger's parameters by name and shape (match.py), the result as a line and a JSON
object (views.py). Nothing here reads a weight."""
