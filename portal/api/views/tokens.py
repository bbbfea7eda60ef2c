"""API tokens: the REST endpoints (throttled) and the "API tokens" page of the logged-in user."""

from __future__ import annotations

import secrets
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from portal.api import selectors, serializers, services
from portal.api.models import ApiToken


class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet[ApiToken]):
    """Your own API tokens. Creating one needs a browser session (a leaked token cannot mint more);
    DELETE revokes one (it stays listed, with when)."""

    serializer_class = serializers.TokenSerializer
    permission_classes = [IsAuthenticated]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "tokens"
    ordering_fields = ["created_at", "id"]

    def get_queryset(self) -> Any:
        return selectors.user_tokens(user=self.request.user)

    @extend_schema(request=serializers.TokenSerializer, responses={201: serializers.TokenCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not isinstance(request.successful_authenticator, SessionAuthentication):
            raise PermissionDenied("Create tokens from a logged-in browser session (or `kiln user token`).")
        form = serializers.TokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, secret = services.token_create(
            user=request.user, name=form.validated_data["name"], expires_at=form.validated_data.get("expires_at")
        )
        data = {**serializers.TokenSerializer(token).data, "secret": secret}
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        services.token_revoke(user=self.request.user, prefix=instance.prefix)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “CI acceptance script”.")
    # One-time value per rendering of the form: the same form sent twice makes one token.
    form_nonce = forms.CharField(widget=forms.HiddenInput, max_length=64)


def _fresh_form() -> TokenForm:
    return TokenForm(initial={"form_nonce": secrets.token_urlsafe(24)})


@require_http_methods(["GET", "POST"])
def token_page(request: HttpRequest) -> HttpResponse:
    """The logged-in user's tokens. A new token's secret is rendered in this response only: never
    redirected through a message (messages live in the session, stored in the database)."""
    form = TokenForm(request.POST) if request.method == "POST" else _fresh_form()
    created: tuple[ApiToken, str] | None = None
    if request.method == "POST" and form.is_valid():
        try:
            created = services.token_create(
                user=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                form_nonce=form.cleaned_data["form_nonce"],
            )
        except services.TokenError as exc:
            # The name kept, a new one-time value: the next submission is a new form.
            form = TokenForm({"name": form.cleaned_data["name"], "form_nonce": secrets.token_urlsafe(24)})
            form.is_valid()
            form.add_error(None, str(exc))
        else:
            form = _fresh_form()
    response = render(
        request,
        "api/tokens.html",
        {"form": form, "tokens": selectors.user_tokens(user=request.user), "created": created},
    )
    if created:
        response["Cache-Control"] = "no-store"  # the secret must not stay in a cache
    return response


@require_POST
def token_revoke_page(request: HttpRequest, prefix: str) -> HttpResponse:
    try:
        token = services.token_revoke(user=request.user, prefix=prefix)  # type: ignore[arg-type]
    except services.TokenError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Token {token.prefix} ({token.name}) revoked.")
    return redirect("api:tokens")
