"""The user admin with the person's organisation inline: Django's own user page, plus the field a
certificate names beside the signer's full name (first and last name are Django's)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User

from portal.models import Person


class PersonInline(admin.StackedInline):
    model = Person
    can_delete = False
    fields = ["organisation"]
    verbose_name_plural = "organisation"


class KilnUserAdmin(UserAdmin):
    inlines = [PersonInline]
    list_display = ["username", "first_name", "last_name", "organisation", "email", "is_active", "is_staff"]
    list_select_related = ["person"]

    @admin.display(description="organisation", ordering="person__organisation")
    def organisation(self, obj: User) -> str:
        person = getattr(obj, "person", None)
        return person.organisation if person is not None else ""


admin.site.unregister(User)
admin.site.register(User, KilnUserAdmin)
