from django.apps import AppConfig


class HistoryConfig(AppConfig):
    # No models: an app for its pages' templates (templates/history/) and its after-close step.
    name = "portal.history"
    label = "history"
    verbose_name = "History"

    def ready(self) -> None:
        from portal.health import signals
        from portal.history.services import run_key_values_store

        # The run's key values, folded for comparisons, once health has judged the run.
        step = ("key values", run_key_values_store)
        if step not in signals.AFTER_CLOSE_STEPS:
            signals.AFTER_CLOSE_STEPS.append(step)
