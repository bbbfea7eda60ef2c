"""Django format modules (settings.FORMAT_MODULE_PATH): one date format on every page."""
