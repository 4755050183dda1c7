-- merges started by many sessions at once, beside VACUUM's
SELECT tsdg_merge('items_v_idx');
