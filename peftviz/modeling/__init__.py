"""Modeling: the encoders (offline MiniLM, local folders, hub ids, peftviz's Longformer), the attention
function with its prefix keys and model folders. The classifier that puts a method on an encoder is
`peftviz.classifier`, above both this package and `peftviz.methods`."""
