"""The Dex agent host: a thin, durable agent loop whose only tool source is the gateway.

Layers, lowest first; a module imports only from its own layer and lower ones
(`tests/unit/test_import_layers.py` checks it, and holds the one list of layers):

    models/          model clients: the protocol, a scripted model, an OpenAI-compatible client
    domain/          records, settings, texts, cards, credentials: the host's vocabulary, no I/O
    store/           the SQLite session store
    gateway_client/  the gateway as the tool source: connection, tools/call, re-issue, tasks, images
    approvals/       the approval gate, and the first of several deciders
    turn/            the turn loop: tool runner, steering and cancelling, compaction, built-in tools
    terminal/        the console: prompts, cards and answers on a terminal
    api/             the host's HTTP API and its web page (api/web/)
    host.py          the composition root: builds the store, model, gateway client, gate and loop
    cli/             `dex-agent` and its commands
"""
