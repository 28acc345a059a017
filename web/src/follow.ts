/**
 * Keeps a scrolling transcript at its end as content arrives (an answer streaming, a reply, the
 * question the user just sent), unless the user scrolled up to read: a scroll of theirs away from
 * the end stops the following, a scroll back to the end (or a message they send) starts it again.
 * Whether it follows is decided by where the user left it, not by how much arrived at once (a long
 * question with its code, or content added while the view was hidden, keeps it following), and a
 * view that is shown again or resized goes back to its end when it was following.
 */
import type { RefObject } from "preact";
import { useEffect } from "preact/hooks";

/** Closer to the end than this counts as at the end. */
const AT_END_PX = 40;

export function useFollowEnd(ref: RefObject<HTMLElement | null>, key: unknown): void {
  useEffect(() => {
    const element = ref.current;
    if (!element) return;
    let following = true;
    const toEnd = (): void => {
      element.scrollTop = element.scrollHeight;
    };
    const onScroll = (): void => {
      // A hidden view (no height) says nothing about where the user is.
      if (element.clientHeight === 0) return;
      following = element.scrollHeight - element.scrollTop - element.clientHeight < AT_END_PX;
    };
    const mutations = new MutationObserver((records) => {
      // The user's own message: back to the end, wherever they were.
      const sent = records.some((record) =>
        [...record.addedNodes].some((node) => node instanceof Element && node.matches(".msg.user")),
      );
      if (sent) following = true;
      if (following) toEnd();
    });
    const resizes = new ResizeObserver(() => {
      if (following) toEnd();
    });
    element.addEventListener("scroll", onScroll, { passive: true });
    mutations.observe(element, { childList: true, subtree: true, characterData: true });
    resizes.observe(element);
    toEnd();
    return () => {
      element.removeEventListener("scroll", onScroll);
      mutations.disconnect();
      resizes.disconnect();
    };
  }, [key]);
}
