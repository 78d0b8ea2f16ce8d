"""Tracing: OpenTelemetry spans of the run trees and their OTLP export.

:mod:`.otel` (the tracer and ``configure_otlp``) and :mod:`.otel_content` (what
of a conversation goes into spans), :mod:`.spans` (a light recording tracer
provider and its sinks), :mod:`.otlp_process` and :mod:`.otlp_child` (export in
a child process), :mod:`.otlp_protocol` (the OTLP protocol names). Nothing is
imported here: each module loads its own dependencies when it is imported.
"""
