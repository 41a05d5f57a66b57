"""Who may book which GPUs when: reservations, access rules, fair-share limits, the slot finder."""
