from django.apps import AppConfig


class ChartsConfig(AppConfig):
    # No models: an app so that its pages' templates (portal/charts/templates/charts/) are found with the others'.
    name = "portal.charts"
    label = "charts"
    verbose_name = "Charts"
