"""GPUs used without a reservation: violations found per sweep, the escalation ladder, idle ends."""
