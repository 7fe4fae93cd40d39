"""The benchmark catalog: the real tool definitions snapshotted in real_tools.json plus generated
look-alikes in the style of published MCP servers (GitHub, Jira, Gmail, Stripe, Postgres, ...),
then, for the larger sizes, invented vendors with the same resources (near-duplicate distractors).

Deterministic: the same size always gives the same tools in the same order."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

REAL = Path(__file__).with_name("real_tools.json")

# service -> (display name, {resource: (plural, fields, extra verbs)})
R = dict[str, tuple[str, list[str], list[str]]]
SERVICES: dict[str, tuple[str, R]] = {
    "github": ("GitHub", {
        "issue": ("issues", ["title", "body", "labels", "assignees", "state"], ["close", "comment"]),
        "pull_request": ("pull requests", ["title", "head branch", "base branch", "reviewers"], ["merge", "review"]),
        "repository": ("repositories", ["name", "visibility", "default branch"], ["fork"]),
        "branch": ("branches", ["name", "source sha"], []),
        "release": ("releases", ["tag", "notes", "draft"], []),
        "workflow_run": ("workflow runs", ["status", "conclusion", "logs"], ["rerun", "cancel"]),
        "file_contents": ("files", ["path", "content", "commit message"], []),
    }),
    "gitlab": ("GitLab", {
        "issue": ("issues", ["title", "description", "labels", "milestone"], ["close"]),
        "merge_request": ("merge requests", ["title", "source branch", "target branch"], ["merge", "approve"]),
        "project": ("projects", ["name", "namespace", "visibility"], []),
        "pipeline": ("CI pipelines", ["ref", "status", "jobs"], ["retry", "cancel"]),
    }),
    "jira": ("Jira", {
        "issue": ("issues", ["summary", "description", "issue type", "priority", "assignee"], ["transition", "comment"]),
        "sprint": ("sprints", ["name", "start date", "end date", "goal"], ["start", "complete"]),
        "project": ("projects", ["key", "lead", "issue types"], []),
        "worklog": ("work logs", ["time spent", "comment", "started"], []),
    }),
    "linear": ("Linear", {
        "issue": ("issues", ["title", "description", "priority", "team", "cycle"], ["comment"]),
        "cycle": ("cycles", ["number", "start", "end"], []),
        "team": ("teams", ["name", "key", "members"], []),
    }),
    "asana": ("Asana", {
        "task": ("tasks", ["name", "notes", "due date", "assignee"], ["complete"]),
        "project": ("projects", ["name", "owner", "color"], []),
    }),
    "trello": ("Trello", {
        "card": ("cards", ["name", "description", "list", "due"], ["move"]),
        "board": ("boards", ["name", "lists", "members"], []),
    }),
    "discord": ("Discord", {
        "message": ("messages", ["channel", "content", "embeds"], ["send", "react"]),
        "channel": ("channels", ["name", "topic", "category"], []),
        "member": ("server members", ["nickname", "roles"], ["ban", "kick"]),
    }),
    "teams": ("Microsoft Teams", {
        "message": ("chat messages", ["chat", "body", "mentions"], ["send"]),
        "channel": ("channels", ["team", "display name", "description"], []),
        "meeting": ("online meetings", ["subject", "start", "attendees"], []),
    }),
    "telegram": ("Telegram", {
        "message": ("messages", ["chat id", "text", "reply markup"], ["send", "pin"]),
    }),
    "gmail": ("Gmail", {
        "email": ("emails", ["to", "subject", "body", "attachments"], ["send", "reply", "forward"]),
        "draft": ("drafts", ["to", "subject", "body"], ["send"]),
        "label": ("labels", ["name", "color"], ["apply"]),
        "thread": ("threads", ["messages", "snippet"], ["archive"]),
    }),
    "outlook": ("Outlook", {
        "mail": ("mail messages", ["recipients", "subject", "body"], ["send", "move"]),
        "contact": ("contacts", ["name", "email address", "phone"], []),
    }),
    "google_calendar": ("Google Calendar", {
        "event": ("calendar events", ["summary", "start time", "end time", "attendees", "location"], ["respond"]),
        "calendar": ("calendars", ["summary", "time zone"], []),
        "free_busy": ("free/busy slots", ["time min", "time max", "calendars"], ["query"]),
    }),
    "google_drive": ("Google Drive", {
        "file": ("files", ["name", "mime type", "parents", "content"], ["upload", "download", "share"]),
        "folder": ("folders", ["name", "parent"], []),
        "permission": ("sharing permissions", ["role", "email address"], []),
    }),
    "dropbox": ("Dropbox", {
        "file": ("files", ["path", "content", "revision"], ["upload", "download", "move"]),
        "shared_link": ("shared links", ["path", "expires", "visibility"], []),
    }),
    "s3": ("Amazon S3", {
        "object": ("objects", ["bucket", "key", "body", "content type"], ["upload", "download", "presign"]),
        "bucket": ("buckets", ["name", "region", "versioning"], []),
    }),
    "notion": ("Notion", {
        "page": ("pages", ["title", "parent", "properties", "blocks"], ["append_blocks"]),
        "database": ("databases", ["title", "properties", "filter"], ["query"]),
        "comment": ("comments", ["page", "rich text"], []),
    }),
    "confluence": ("Confluence", {
        "page": ("wiki pages", ["space", "title", "body"], []),
        "space": ("spaces", ["key", "name", "description"], []),
    }),
    "google_docs": ("Google Docs", {
        "document": ("documents", ["title", "body"], ["export"]),
    }),
    "google_sheets": ("Google Sheets", {
        "spreadsheet": ("spreadsheets", ["title", "sheets"], []),
        "range": ("cell ranges", ["spreadsheet id", "A1 range", "values"], ["append", "clear"]),
    }),
    "salesforce": ("Salesforce", {
        "lead": ("leads", ["first name", "last name", "company", "status"], ["convert"]),
        "opportunity": ("opportunities", ["name", "stage", "amount", "close date"], []),
        "account": ("accounts", ["name", "industry", "owner"], []),
        "soql": ("SOQL query results", ["query"], ["run"]),
    }),
    "pipedrive": ("Pipedrive", {
        "deal": ("deals", ["title", "value", "stage", "person"], []),
        "person": ("people", ["name", "email", "organization"], []),
    }),
    "zendesk": ("Zendesk", {
        "ticket": ("support tickets", ["subject", "requester", "priority", "status"], ["comment", "assign"]),
        "user": ("end users", ["name", "email", "organization"], []),
    }),
    "intercom": ("Intercom", {
        "conversation": ("conversations", ["contact", "body", "state"], ["reply", "close", "snooze"]),
        "contact": ("contacts", ["email", "name", "custom attributes"], []),
    }),
    "stripe": ("Stripe", {
        "customer": ("customers", ["email", "name", "payment method"], []),
        "payment_intent": ("payment intents", ["amount", "currency", "customer"], ["confirm", "capture"]),
        "refund": ("refunds", ["charge", "amount", "reason"], []),
        "invoice": ("invoices", ["customer", "line items", "due date"], ["finalize", "void"]),
        "subscription": ("subscriptions", ["customer", "price", "trial end"], ["cancel"]),
        "payout": ("payouts", ["amount", "destination", "arrival date"], []),
    }),
    "paypal": ("PayPal", {
        "order": ("orders", ["purchase units", "intent"], ["capture"]),
        "dispute": ("disputes", ["reason", "status", "amount"], ["accept"]),
    }),
    "shopify": ("Shopify", {
        "product": ("products", ["title", "vendor", "variants", "price"], []),
        "order": ("orders", ["line items", "customer", "fulfillment status"], ["fulfill", "cancel"]),
        "inventory_level": ("inventory levels", ["location", "available quantity"], ["adjust"]),
    }),
    "postgres": ("PostgreSQL", {
        "query": ("SQL query results", ["sql"], ["run", "explain"]),
        "table": ("tables", ["schema", "columns", "row count"], ["describe"]),
        "index": ("indexes", ["table", "columns", "unique"], []),
    }),
    "mysql": ("MySQL", {
        "query": ("query results", ["statement"], ["execute"]),
        "table": ("tables", ["database", "columns"], ["describe"]),
    }),
    "mongodb": ("MongoDB", {
        "document": ("documents", ["collection", "filter", "projection"], ["aggregate"]),
        "collection": ("collections", ["database", "indexes"], []),
    }),
    "redis": ("Redis", {
        "key": ("keys", ["key", "value", "ttl"], ["expire"]),
    }),
    "bigquery": ("BigQuery", {
        "dataset": ("datasets", ["project", "location"], []),
        "job": ("query jobs", ["sql", "destination table"], ["run"]),
    }),
    "snowflake": ("Snowflake", {
        "warehouse": ("warehouses", ["size", "auto suspend"], ["resume", "suspend"]),
        "query": ("queries", ["sql", "warehouse"], ["run"]),
    }),
    "aws_ec2": ("AWS EC2", {
        "instance": ("instances", ["instance type", "ami", "state", "tags"], ["start", "stop", "reboot"]),
        "security_group": ("security groups", ["ingress rules", "egress rules"], []),
    }),
    "kubernetes": ("Kubernetes", {
        "pod": ("pods", ["namespace", "containers", "status"], ["logs", "exec"]),
        "deployment": ("deployments", ["replicas", "image", "namespace"], ["scale", "rollout_restart"]),
        "service": ("services", ["selector", "ports", "type"], []),
    }),
    "docker": ("Docker", {
        "container": ("containers", ["image", "ports", "env"], ["start", "stop", "logs"]),
        "image": ("images", ["repository", "tag", "size"], ["pull", "build"]),
    }),
    "cloudflare": ("Cloudflare", {
        "dns_record": ("DNS records", ["zone", "type", "content", "ttl"], []),
        "worker": ("Workers scripts", ["script", "routes"], ["deploy"]),
        "cache": ("cached URLs", ["zone", "urls"], ["purge"]),
    }),
    "vercel": ("Vercel", {
        "deployment": ("deployments", ["project", "target", "url"], ["promote", "cancel"]),
        "env_var": ("environment variables", ["key", "value", "target"], []),
    }),
    "datadog": ("Datadog", {
        "monitor": ("monitors", ["query", "thresholds", "message"], ["mute"]),
        "metric": ("metric time series", ["query", "from", "to"], ["query"]),
        "log": ("log events", ["query", "index", "time range"], []),
    }),
    "sentry": ("Sentry", {
        "issue": ("error issues", ["project", "culprit", "events", "status"], ["resolve", "ignore"]),
        "event": ("error events", ["stack trace", "tags", "release"], []),
    }),
    "pagerduty": ("PagerDuty", {
        "incident": ("incidents", ["service", "urgency", "status"], ["acknowledge", "resolve"]),
        "oncall": ("on-call schedules", ["escalation policy", "user"], []),
    }),
    "grafana": ("Grafana", {
        "dashboard": ("dashboards", ["title", "panels", "folder"], []),
        "alert_rule": ("alert rules", ["condition", "for", "labels"], []),
    }),
    "spotify": ("Spotify", {
        "playlist": ("playlists", ["name", "tracks", "public"], ["add_tracks"]),
        "playback": ("playback state", ["device", "track"], ["play", "pause", "skip"]),
    }),
    "twilio": ("Twilio", {
        "sms": ("SMS messages", ["to", "from", "body"], ["send"]),
        "call": ("phone calls", ["to", "from", "twiml"], ["place"]),
    }),
    "airtable": ("Airtable", {
        "record": ("records", ["base", "table", "fields"], []),
        "base": ("bases", ["name", "tables"], []),
    }),
    "figma": ("Figma", {
        "file": ("design files", ["key", "nodes", "version"], ["export_images"]),
        "comment": ("file comments", ["message", "position"], []),
    }),
    "youtube": ("YouTube", {
        "video": ("videos", ["title", "channel", "duration"], ["get_transcript"]),
        "playlist": ("playlists", ["title", "items"], []),
    }),
    "google_maps": ("Google Maps", {
        "place": ("places", ["name", "address", "rating", "opening hours"], ["nearby"]),
        "directions": ("routes", ["origin", "destination", "mode"], ["get"]),
        "geocode": ("geocoding results", ["address", "latitude", "longitude"], ["reverse"]),
    }),
    "weather": ("National Weather Service", {
        "forecast": ("forecasts", ["latitude", "longitude", "periods"], ["get"]),
        "alert": ("weather alerts", ["state", "severity", "event"], []),
    }),
}

VERBS: dict[str, tuple[str, bool]] = {  # verb -> (description template, read only)
    "list": ("List {plural} in {svc}. Supports pagination with limit and cursor.", True),
    "get": ("Get one {svc} {res} by its id, with {fields}.", True),
    "create": ("Create a new {res} in {svc} with {fields}.", False),
    "update": ("Update an existing {svc} {res}: change {fields}.", False),
    "delete": ("Permanently delete a {res} from {svc}.", False),
    "search": ("Search {svc} {plural} by a text query, filtering on {fields}.", True),
}
EXTRA_TEMPLATE = "{Verb} a {svc} {res} ({fields})."

SYLLABLES = ["zor", "bli", "nak", "tum", "vex", "pra", "lon", "quo", "dri", "sel", "mak", "fin", "ora", "tek", "wyn", "gal"]


def _words(s: str) -> str:
    return s.replace("_", " ")


def _schema(res: str, verb: str, fields: list[str]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if verb in ("get", "update", "delete") or verb not in VERBS:
        props[f"{res}_id"] = {"type": "string", "description": f"The {_words(res)} id."}
    if verb in ("list", "search"):
        props["limit"] = {"type": "integer", "description": "Most results to return."}
        props["cursor"] = {"type": "string", "description": "Page cursor from a previous call."}
    if verb == "search":
        props["query"] = {"type": "string", "description": "Free-text search query."}
    if verb in ("create", "update", "search") or verb not in VERBS:
        for f in fields:
            props[f.replace(" ", "_").replace("/", "_")] = {"type": "string", "description": f"The {f}."}
    return {"type": "object", "properties": props}


def _tool(prefix: str, svc: str, res: str, plural: str, fields: list[str], verb: str) -> dict[str, Any]:
    template, read_only = VERBS.get(verb, (EXTRA_TEMPLATE, False))
    desc = template.format(svc=svc, res=_words(res), plural=plural, fields=", ".join(fields),
                           Verb=_words(verb).capitalize())
    return {"name": f"{prefix}_{verb}_{res}", "description": desc,
            "inputSchema": _schema(res, verb, fields),
            "annotations": {"readOnlyHint": read_only, "destructiveHint": verb == "delete"}}


def _service_tools(prefix: str, svc: str, resources: R) -> list[dict[str, Any]]:
    out = []
    for res, (plural, fields, extra) in resources.items():
        for verb in [*VERBS, *extra]:
            out.append(_tool(prefix, svc, res, plural, fields, verb))
    return out


def real_tools() -> list[dict[str, Any]]:
    return [{k: v for k, v in t.items() if k != "_source"} for t in json.loads(REAL.read_text())]


def catalog(size: int) -> list[dict[str, Any]]:
    """`size` tool definitions: the real ones, the named look-alikes, then invented vendors."""
    tools = real_tools()
    for prefix, (svc, resources) in SERVICES.items():
        tools += _service_tools(prefix, svc, resources)
    rng = random.Random(28)
    services = list(SERVICES.values())
    seen = {t["name"] for t in tools}
    while len(tools) < size:
        vendor = "".join(rng.choice(SYLLABLES) for _ in range(3))
        svc, resources = rng.choice(services)
        display = vendor.capitalize()
        for t in _service_tools(vendor, display, resources):
            if t["name"] not in seen:
                seen.add(t["name"])
                tools.append(t)
    return tools[:size]
