"""Recording runs trained elsewhere: `transformers` (the Trainer callback) and `trackers` (TensorBoard, MLflow)."""
