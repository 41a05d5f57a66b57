import { gpureserveCell, widgetCell } from '../snippets';

describe('snippets', () => {
  it('opens a widget', () => {
    expect(widgetCell('calendar')).toBe('from jupyter_gpuhive import widgets\nwidgets.calendar()');
    expect(widgetCell('dashboard')).toBe('from jupyter_gpuhive import widgets\nwidgets.dashboard()');
  });
  it('reserves the selected GPUs with %gpureserve', () => {
    expect(gpureserveCell(['gpu1:1', 'gpu1:0'], '2h')).toBe('%load_ext jupyter_gpuhive\n%gpureserve gpu1:0,1 --for 2h');
    expect(gpureserveCell(['gpu1:0', 'gpu2:3'], '30m', 'say "hi"')).toBe(
      '%load_ext jupyter_gpuhive\n%gpureserve gpu1:0 gpu2:3 --for 30m --title "say \\"hi\\""'
    );
  });
  it('asks for one GPU when none is selected', () => {
    expect(gpureserveCell([], '1h')).toBe('%load_ext jupyter_gpuhive\n%gpureserve 1 --for 1h');
  });
});
