"""The pytest plugin: gates, claims, sessions, the environment and the code each claim executed."""
