"""bookings."""
