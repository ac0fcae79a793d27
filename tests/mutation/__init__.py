"""Mutation testing of the core's decision modules (.ci/mutation)."""
