"""Training one run: its config and presets, the trainer, the engine (Hugging Face Accelerate), checkpoints,
progress events, and inference (predictions and per-epoch metrics)."""
