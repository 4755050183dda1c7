-- a row picked uniformly among the ids given out so far
DELETE FROM items WHERE id = (SELECT id FROM items
	WHERE id >= (SELECT random() * max(id) FROM items) ORDER BY id LIMIT 1);
