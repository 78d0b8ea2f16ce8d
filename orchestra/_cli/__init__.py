"""What the ``orchestra`` command line is made of, below its commands.

The commands themselves (the click group and ``run``, the console script's
entry point) are in :mod:`orchestra._main`, the one module above this package,
the console and the workers. These modules are shared with them: building a
run's agent from its saved recipe (:mod:`.recipe`), running a tree under
signals with live progress (:mod:`.session`), exit codes (:mod:`.errors`),
layouts for people (:mod:`.view`, :mod:`.output`), the demo's scenarios
(:mod:`.demo`) and the options' parsing (:mod:`.options`, :mod:`.money`).
Nothing is imported here: a module loads only what it needs.
"""
