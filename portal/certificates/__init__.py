"""Acceptance campaigns, sign-off and sealed certificates."""
