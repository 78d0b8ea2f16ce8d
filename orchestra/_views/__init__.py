"""Views: a run tree said to people and to shells.

The command line, the web console and the workers share these: the text
layouts of a tree and of the list of runs (:mod:`.text`, printed by
:mod:`.printed`, drawn live by :mod:`.live`), the report of a saved tree
(:mod:`.report`) and exit codes (:mod:`.exits`).
Nothing is imported here: a module loads only what it needs.
"""
