"""Kiln pages: history (views, selectors, urls). Not an app of its own: it reads the runs app's models."""
