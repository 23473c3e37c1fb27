"""Loading vision-language targets and their processors, and their positions."""
