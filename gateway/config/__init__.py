"""gateway.yaml: the model (`model.py`), the YAML reader that keeps file and line (`yaml_source.py`,
`yaml_compose.py`), `DEX_GATEWAY__*` overrides (`env.py`), durations, the operations sections
(`ops.py`) and the syntax of the connector grants (`grants.py`)."""
