"""The node side of staging: stdlib-only modules that run on the nodes as one joined script.

In: one op (probe, build, write, check) and its JSON request on the command line. Out: JSON lines on
stdout. Nothing is imported here: each module is also importable on its own (tests, the controller's
constants), and labkit.stage.transport joins their text for the node.
"""
