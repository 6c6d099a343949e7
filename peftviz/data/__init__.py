"""Datasets by source: the built-in BBC News corpus, files and class folders, uploads, the Hugging Face hub."""
