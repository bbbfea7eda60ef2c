from django.apps import AppConfig


class CertificatesConfig(AppConfig):
    name = "portal.certificates"
    label = "certificates"
    verbose_name = "Certificates"
