"""Who calls: principals (from tokens) and the scope of what each may reach."""
