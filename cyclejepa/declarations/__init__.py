"""Declarations: the facts and typed options each built-in component declares of itself, torch-free
and implementation-free, so that loading a config imports no implementation. Each module's
``DECLARED`` maps a registered name to its declaration, which the implementation inherits.
"""
