"""Kiln pages: charts (views, selectors, urls). Not an app of its own: it reads the runs app's models."""
