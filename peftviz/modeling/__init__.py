"""Modeling: the encoders (offline MiniLM, local folders, hub ids, peftviz's Longformer), the attention
function with its prefix keys, model folders, and the classifier that puts a method on an encoder."""
