from django.apps import AppConfig


class HistoryConfig(AppConfig):
    # No models: an app so that its pages' templates (templates/history/) are found with the others'.
    name = "portal.history"
    label = "history"
    verbose_name = "History"
