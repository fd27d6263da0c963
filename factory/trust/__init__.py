"""What keeps hostile input and secrets in their place: the path-safety rules and the
credential rules (refused in URLs, masked in everything printed)."""
