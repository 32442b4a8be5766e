"""Recording a session to a file, reading it back, and replaying it through the live merges."""
