"""Secure aggregation of private leaves' releases (issue 26): masks, shares, accounting."""
