"""The demo shop: orders, and the notifications prescient raises about unshipped ones."""
