"""Training one run (its settings are `peftviz.run_config`): the trainer, the engine (Hugging Face
Accelerate), checkpoints, progress events, and inference (predictions and per-epoch metrics)."""
