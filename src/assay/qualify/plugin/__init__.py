"""The pytest plugin: gates, claims, sessions, the environment, the code each claim executed, and
turning a session's declarations into receipts."""
