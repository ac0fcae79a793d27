"""Mutation fuzzing of every ingestion path on every installed plugin (see README.md)."""
