/** Small DOM helpers the sidebar's sections share (plain DOM, no framework). */

/** An element with attributes (`class` sets className) and children. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') {
      node.className = v;
    } else {
      node.setAttribute(k, v);
    }
  }
  for (const c of children) {
    node.append(c);
  }
  return node;
}

/** A button whose accessible name (and tooltip) is `aria`. */
export function button(label: string, aria: string, onClick: () => void, cls = ''): HTMLButtonElement {
  const b = el('button', { type: 'button', class: `jp-gpuhive-button ${cls}`.trim(), 'aria-label': aria, title: aria }, label);
  b.addEventListener('click', onClick);
  return b;
}

/** A titled section of the panel, labelled by its heading. */
export function section(title: string, cls: string, body: HTMLElement): HTMLElement {
  const id = `${cls}-heading`;
  return el('section', { class: `jp-gpuhive-section ${cls}`, 'aria-labelledby': id }, el('h3', { id }, title), body);
}

/** A form's request as built from its fields: the body, or why it cannot be sent. */
export interface IFormRequest {
  body?: Record<string, unknown>;
  error?: string;
}

/**
 * Send a form: its reason in `errorNode` when it cannot be sent or the server refuses
 * (the server's message), otherwise `done` with the answer.
 */
export async function sendForm<T>(
  req: IFormRequest,
  errorNode: HTMLElement,
  send: (body: Record<string, unknown>) => Promise<T>,
  done: (made: T) => Promise<void> | void
): Promise<void> {
  if (!req.body) {
    errorNode.textContent = req.error ?? '';
    return;
  }
  errorNode.textContent = '';
  try {
    await done(await send(req.body));
  } catch (error) {
    errorNode.textContent = (error as Error).message;
  }
}
