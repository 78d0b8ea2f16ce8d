"""The model-call layer: calling a provider, and counting what a call costs.

:mod:`.provider` (the ``Provider`` protocol and ``OpenAIProvider``),
:mod:`.http` (admission and sharded connection pools), :mod:`.retry` (retrying
a call after a transient failure), :mod:`.recover` (tool calls a model wrote as
text), :mod:`.tokens` (counting prompts and completions offline) and
:mod:`.margin` (how much more than our own count to reserve for a prompt).
Nothing is imported here: each module loads its own dependencies when it is
imported.
"""
