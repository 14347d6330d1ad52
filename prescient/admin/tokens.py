"""The admin of API tokens: create one (its secret is shown once), scope it, revoke it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import ForeignKey, QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient.api import tokens
from prescient.checks import registered
from prescient.models import ApiToken

# ModelAdmin and ModelForm are generic in django-stubs only (subscripting them at runtime needs
# django_stubs_ext).
if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups

    _AdminBase = admin.ModelAdmin[ApiToken]
    _FormBase = forms.ModelForm[ApiToken]
else:
    _AdminBase = admin.ModelAdmin
    _FormBase = forms.ModelForm


#: Where a new token's secret waits, in the session, for the page that shows it once.
SESSION_KEY = "prescient_new_token"


class ApiTokenForm(_FormBase):
    checks = forms.MultipleChoiceField(
        label=_("checks"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The checks whose jobs the token may see, create and steer."),
    )

    class Meta:
        model = ApiToken
        fields = ["name", "user", "all_checks", "checks", "expires_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        current = self.instance.checks if isinstance(self.instance.checks, list) else []
        names = {entry.name for entry in registered()} | {name for name in current if isinstance(name, str)}
        self.fields["checks"].choices = [(name, name) for name in sorted(names)]  # type: ignore[attr-defined]

    def clean_checks(self) -> list[str]:
        return sorted(set(self.cleaned_data.get("checks") or []))

    def clean_expires_at(self) -> datetime | None:
        expires_at: datetime | None = self.cleaned_data.get("expires_at")
        # A time already past would make a token dead on arrival; ending one now is revoking it.
        if expires_at is not None and "expires_at" in self.changed_data and expires_at <= timezone.now():
            raise forms.ValidationError(
                gettext("Give a time in the future, or leave it empty for a token that does not expire.")
            )
        return expires_at

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        all_checks, checks = data.get("all_checks"), data.get("checks")
        if not all_checks and not checks:
            self.add_error("checks", gettext("Pick the checks this token may act on, or tick “all checks”."))
        elif all_checks and checks:
            self.add_error("checks", gettext("Either tick “all checks” or pick checks, not both."))
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(_AdminBase):
    form = ApiTokenForm
    list_display = ["name", "user", "prefix_shown", "scope", "created_at", "last_used_at", "expires_at", "status"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter), "all_checks"]
    search_fields = ["name", "=prefix"]
    actions = ["revoke_tokens"]
    date_hierarchy = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        queryset = super().get_queryset(request).select_related("user")
        if request.user.is_superuser:
            return queryset
        # Others see and manage only their own tokens (a scope is widened on the change page).
        return queryset.filter(user=request.user.pk)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> _FieldGroups:
        if obj is None:
            return ["name", "user", "all_checks", "checks", "expires_at"]
        return [
            "name", "user", "prefix_shown", "all_checks", "checks", "expires_at", "created_at", "last_used_at",
            "revoked_at",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return []
        # The owner is fixed: moving a token to another user would hand it their permissions.
        return ["user", "prefix_shown", "created_at", "last_used_at", "revoked_at"]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"user": request.user.pk}

    def formfield_for_foreignkey(
        self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelChoiceField[Any] | None:
        if db_field.name == "user" and not request.user.is_superuser:
            # A token acts with its owner's permissions: only a superuser may make one for someone else.
            # The admin admits signed-in staff only: the user is never anonymous, its pk never None.
            user_pk = cast("int | str", request.user.pk)
            kwargs["queryset"] = get_user_model()._default_manager.filter(pk=user_pk)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description=_("prefix"), ordering="prefix")
    def prefix_shown(self, token: ApiToken) -> str:
        return f"{token.prefix}…"

    @admin.display(description=_("scope"))
    def scope(self, token: ApiToken) -> str:
        if token.all_checks:
            return gettext("all checks")
        return ", ".join(token.checks) if isinstance(token.checks, list) else "-"

    @admin.display(description=_("status"), ordering="revoked_at")
    def status(self, token: ApiToken) -> str:
        if token.is_revoked:
            return gettext("revoked")
        return gettext("expired") if token.is_expired(timezone.now()) else gettext("active")

    def save_model(self, request: HttpRequest, obj: ApiToken, form: forms.Form, change: bool) -> None:
        if not change:
            # Kept on the instance only until response_add shows it; never stored.
            obj._prescient_secret = tokens.fill(obj, now=timezone.now())  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        """POST/redirect/GET: the secret waits in the session for the one page that shows it.

        A refresh of that page (or a second visit) finds it gone and shows it no more; it never
        re-posts the form, so it never creates a second token.
        """
        secret = getattr(obj, "_prescient_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        request.session[SESSION_KEY] = {"pk": obj.pk, "secret": secret}
        return HttpResponseRedirect(self._url("created", obj.pk))

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        created = path(
            "<path:object_id>/created/",
            self.admin_site.admin_view(self.created_view),
            name=f"{opts.app_label}_{opts.model_name}_created",
        )
        return [created, *super().get_urls()]

    def _url(self, name: str, pk: int | str) -> str:
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_{name}", args=[quote(pk)], current_app=self.admin_site.name
        )

    def created_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The new token's secret, shown once (then forgotten: the session keeps it no longer)."""
        token = self.get_object(request, unquote(object_id))
        if token is None or not self.has_view_or_change_permission(request, token):
            raise PermissionDenied
        pending = request.session.get(SESSION_KEY)
        if not isinstance(pending, dict) or pending.get("pk") != token.pk:
            shown = gettext("A token's secret is shown only once. Lost it? Revoke the token and create another.")
            messages.info(request, shown)
            return HttpResponseRedirect(self._url("change", token.pk))
        del request.session[SESSION_KEY]
        try:
            api_root = reverse("prescient-api:openapi-json").removesuffix("openapi.json")
        except NoReverseMatch:
            api_root = None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("API token created"),
            "token": token,
            "token_url": self._url("change", token.pk),
            "secret": pending["secret"],
            "api_url": request.build_absolute_uri(api_root) if api_root else None,
            "breadcrumbs_as_list": django.VERSION >= (6, 0),  # Django 6 draws breadcrumbs as a list
        }
        request.current_app = self.admin_site.name
        response = TemplateResponse(request, "prescient/admin/token_created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description=_("Revoke selected tokens"), permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = tokens.revoke(queryset, now=timezone.now())
        self.message_user(
            request,
            ngettext("Revoked %(count)d token.", "Revoked %(count)d tokens.", count) % {"count": count},
            messages.SUCCESS,
        )
