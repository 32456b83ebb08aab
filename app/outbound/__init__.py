"""The outbound guard: every HTTP call a tenant can aim (HTTP tools, webhook validators,
completion callbacks) goes through here. See docs/outbound.md.

Modules: ``guard`` (what may be called, and where it resolves), ``client`` (the guarded
POST), ``webhooks`` (Standard Webhooks signatures), ``secrets`` (tenant secrets for
headers), ``errors``.
"""
