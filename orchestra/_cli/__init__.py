"""The ``orchestra`` command line: one module per command (or small family).

:mod:`.main` is the click group and the console script's entry point; it adds
:mod:`.demo`, :mod:`.run_task` (run), :mod:`.resume`, :mod:`.decide` (approve, reject),
:mod:`.cancel`, :mod:`.reads` (runs, show, trace), :mod:`.prices` and :mod:`.serve` (console,
worker, serve-scripted, mcp list). They share the options in :mod:`.common`
and :mod:`.options`, the store a ``--store`` names (:mod:`.stores`), running a
tree until it stops (:mod:`.start`, :mod:`.session`) and one error path
(:mod:`.errors`).

Below this package, and shared with the web console and the workers:
recipes (:mod:`orchestra._recipes`) and views (:mod:`orchestra._views`).
Nothing is imported here: a module loads only what it needs.
"""
