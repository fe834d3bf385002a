"""attnkit inside other libraries: ``attnkit.integrations.transformers`` (Hugging Face)."""
