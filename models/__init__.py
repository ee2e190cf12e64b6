"""HE-friendly model definitions (imported as hemlp.models)."""
