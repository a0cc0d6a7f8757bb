"""genie upgrade: bring a project to the current templates, keeping its user's edits."""
