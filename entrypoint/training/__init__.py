"""Built-in MultiWorkerMirroredStrategy trainer: python -m entrypoint.training."""
