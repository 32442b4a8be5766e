"""One folder a pane: its collector, aggregation, model part, widgets and exports.

Empty on purpose: importing one pane's module must not import the registry (ktop.registry),
which imports every pane.
"""
