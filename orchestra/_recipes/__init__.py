"""Recipes: how a saved run's agent and provider are rebuilt in any process.

The command line, the web console and the workers all start and resume runs
from a :class:`~orchestra._recipes.recipe.Recipe` saved with the run: its
agent (:mod:`.demo` for the demo's scenarios), its endpoint and its prices
(:mod:`.money`), and how its model calls are made (:mod:`.calls`: one builder
for the command line and the workers). Nothing here knows about a terminal or a web page.
Nothing is imported here: a module loads only what it needs.
"""
