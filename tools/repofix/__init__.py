"""RepoFix's offline side: the task generator (``repofix_gen``), its bug operators and pytest plugin, and the repos archive packer."""
