"""What every part of askq shares, and nothing that talks to Redis: the models of a
request and its answers, the errors (`AskError` and its codes), the texts people read,
the types, the checks of input, the settings, how a new request is built; and the two
instruments every layer reports to, no-ops until a process turns them on (the metrics
recorder, the trace spans). May use: nothing else of askq's (the standard library,
pydantic, pydantic-settings, OpenTelemetry's API when installed)."""
