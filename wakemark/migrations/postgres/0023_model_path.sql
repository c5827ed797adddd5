-- Where each model's file was read (``path``: the records' vectors' model, ``staged_path``:
-- a rebuild's), so that a running process of another model can load the stored one
-- after a rebuild swaps it in (wakemark.shared.embedding.onnx, ``Embedder.switch``).
ALTER TABLE embedding_model ADD COLUMN path text, ADD COLUMN staged_path text;
