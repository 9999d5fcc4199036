"""Client-facing OpenAI routes and the /gateway/* admin routes."""
