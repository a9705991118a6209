"""Declarations: the facts each built-in component declares of itself that a config needs when it
loads, torch-free and implementation-free.

`kinds` holds what each kind of component declares (`kinds.DatasetDeclaration`,
`kinds.ProviderDeclaration`); `datasets` and `providers` the built-ins' declarations, which their
implementations inherit (one home per fact), each module's ``DECLARED`` mapping the registered
name to its declaration (`cyclejepa.registry.Registry.declared`). Loading a config imports these
modules and no implementation.
"""
